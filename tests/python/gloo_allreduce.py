"""A real PyTorch DDP start under ddp-launch: env:// init, a gloo all_reduce, a barrier.

Each rank contributes rank + 1, so every rank must see sum(1..world). With --fail-rank R,
rank R raises inside torch's @record, which writes PyTorch's own error.json. With
--late-rank R, rank R reaches init_process_group only once the file WARM_TRIGGER names
exists (the others wait for it there). With --leave-early R, rank R returns (exit 0) right
after init_process_group, as a rank that breaks out of its training loop early does; the
others call their collective once its process has ended (its pid in TMPDIR/left-early), as
they would after a longer loop, so that its exit comes before their failure.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


def _wait_for_the_end_of(mark, timeout=60):
    """Waits until the file `mark` names a process that has ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(mark) as f:
                os.kill(int(f.read()), 0)
        except (FileNotFoundError, ValueError):
            pass
        except ProcessLookupError:
            return
        time.sleep(0.01)


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
    mark = os.path.join(os.environ.get("TMPDIR", "/tmp"), "left-early")
    if rank == args.leave_early:
        with open(mark + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(mark + ".tmp", mark)
        return
    if args.leave_early >= 0:
        _wait_for_the_end_of(mark)
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    dist.barrier()
    print(f"rank {rank} of {world} sum {int(value.item())}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
