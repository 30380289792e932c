"""A DDP training run (gloo, CPU, deterministic ops) that saves every step with
ddp_launch.checkpoint and resumes from what load() gives, as the launcher's checkpoint tests
run it: checkpoint_train.py STEPS [ATTEMPT:MODE:STEP ...].

Two models of the same start train on the same batches: the resumed one, and a reference
that every attempt trains from its first step without a checkpoint (an uninterrupted run's
losses, in the same processes: no second job to start). Each rank prints "pid R P" and
"dir R DDP_CHECKPOINT_DIR" at its start, "loaded R S (DDP_CHECKPOINT_STEP=V)" when it
resumes from step S, "loss R S HEX" for each step the resumed model trains and "ref R S HEX"
for the reference's (a loss's float.hex(): its bits), then "done R".
What rank 1 does in attempt ATTEMPT (TORCHELASTIC_RESTART_COUNT), MODE:
  kill: SIGKILLs itself once step STEP is saved by every rank (a barrier).
"""
import os
import signal
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import ddp_launch

ck = ddp_launch.checkpoint
steps = int(sys.argv[1])
attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
mode, at = "", -1
for entry in sys.argv[2:]:
    when, what, step = entry.split(":")
    if when == attempt:
        mode, at = what, int(step)

torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"pid {rank} {os.getpid()}", flush=True)
print(f"dir {rank} {os.environ.get('DDP_CHECKPOINT_DIR', '-')}", flush=True)


def make():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    return model, DistributedDataParallel(model), torch.optim.SGD(model.parameters(), lr=0.05,
                                                                   momentum=0.9)


def train(ddp, optimizer, step):
    generator = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(8, 16, generator=generator)
    y = x.sum(1, keepdim=True).sin()
    optimizer.zero_grad()
    loss = ((ddp(x) - y) ** 2).mean()
    loss.backward()
    optimizer.step()
    return loss.item().hex()


model, ddp, optimizer = make()
_, reference, reference_optimizer = make()
start = 0
loaded = ck.load()
if loaded is not None:
    start, state = loaded
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    asked = os.environ.get("DDP_CHECKPOINT_STEP", "-")
    print(f"loaded {rank} {start} (DDP_CHECKPOINT_STEP={asked})", flush=True)
acting = rank == 1



for step in range(1, steps + 1):
    print(f"ref {rank} {step} {train(reference, reference_optimizer, step)}", flush=True)
    if step <= start:
        continue
    print(f"loss {rank} {step} {train(ddp, optimizer, step)}", flush=True)
    ck.save(step, {"model": model.state_dict(), "optimizer": optimizer.state_dict()})
    if mode == "kill" and step == at:
        # Every rank has saved step STEP before rank 1 dies: else rank 0, stopped by the
        # launcher in the middle of its own save of it (a loaded machine), holds STEP-1.
        dist.barrier()
        if acting:
            os.kill(os.getpid(), signal.SIGKILL)
print(f"done {rank}", flush=True)
