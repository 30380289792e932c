"""A script from the torch.distributed.launch era: it requires --local_rank."""
import argparse
import os

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, required=True)
parser.add_argument("--lr", type=float, default=0.01)
args = parser.parse_args()
assert args.local_rank == int(os.environ["LOCAL_RANK"]), (args.local_rank, os.environ["LOCAL_RANK"])
print(f"legacy rank {args.local_rank} lr {args.lr}")
