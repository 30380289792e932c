"""A real PyTorch DDP start under ddp-launch: env:// init, a gloo all_reduce, a barrier.

Each rank contributes rank + 1, so every rank must see sum(1..world). With --fail-rank R,
rank R raises inside torch's @record, which writes PyTorch's own error.json. With
--late-rank R, rank R reaches init_process_group only once the file WARM_TRIGGER names
exists (the others wait for it there). With --leave-early R, rank R returns (exit 0) right
after init_process_group, as a rank that breaks out of its training loop early does.
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--late-rank", type=int, default=-1)
    parser.add_argument("--leave-early", type=int, default=-1)
    args = parser.parse_args()
    if int(os.environ["RANK"]) == args.late_rank:
        # Imported here, from this file's folder (which the torch 2.6 tests' shim leaves out
        # of sys.path): the install tests run this script alone, without --late-rank.
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from warm_trigger import wait_for_trigger

        wait_for_trigger()
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
    if rank == args.fail_rank:
        raise RuntimeError(f"deliberate failure on rank {rank}")
    if rank == args.leave_early:
        return
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    dist.barrier()
    print(f"rank {rank} of {world} sum {int(value.item())}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
