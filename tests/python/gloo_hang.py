"""A PyTorch job that hangs: rank 1 stops in wait_forever() while the others wait in a
gloo all_reduce it never enters (gloo's own timeout is 30 minutes).

Each rank prints "entering" before the collective it is stuck in, so a test can wait for
that; the launcher's --hang-timeout is what must find the hang.
"""
import os
import time

import torch
import torch.distributed as dist


def wait_forever():
    while True:
        time.sleep(3600)


def main():
    dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank()
    value = torch.tensor([1.0])
    dist.all_reduce(value)
    print(f"rank {rank} entering the second all_reduce", flush=True)
    if rank == 1:
        wait_forever()
    dist.all_reduce(value)
    print(f"rank {rank} was never stuck", flush=True)


if __name__ == "__main__":
    assert "RANK" in os.environ
    main()
