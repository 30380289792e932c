"""A DDP training run (gloo, CPU, deterministic ops) that saves every step with
ddp_launch.checkpoint and resumes from what load() gives, as the launcher's checkpoint tests
run it: checkpoint_train.py STEPS [MODE STEP].

Two models of the same start train on the same batches: the resumed one, and a reference
that every attempt trains from its first step without a checkpoint (an uninterrupted run's
losses, in the same processes: no second job to start). Each rank prints "pid R P" and
"dir R DDP_CHECKPOINT_DIR" at its start, "loaded R S" when it resumes from step S, "loss R S
HEX" for each step the resumed model trains and "ref R S HEX" for the reference's (a loss's
float.hex(): its bits), then "done R".
MODE, in the first attempt (TORCHELASTIC_RESTART_COUNT=0) only, on rank 1:
  kill: SIGKILLs itself once step STEP is saved;
  kill-in-save: SIGKILLs itself (a thread that watches the slot) while step STEP's save is
    being written.
"""
import os
import signal
import sys
import threading

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import ddp_launch

ck = ddp_launch.checkpoint
steps = int(sys.argv[1])
mode, at = (sys.argv[2], int(sys.argv[3])) if len(sys.argv) > 3 else ("", -1)
first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"

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
    print(f"loaded {rank} {start}", flush=True)
acting = first_attempt and rank == 1


def kill_when_writing(step):
    """SIGKILLs this process as soon as a slot of this rank holds `step` being written."""
    directory = os.environ["DDP_CHECKPOINT_DIR"]
    while True:
        for slot in (0, 1):
            h = ck._read_header(os.path.join(directory, f"rank{rank}.{slot}"))[0]
            if h is not None and h.state == 1 and h.step == step:
                os.kill(os.getpid(), signal.SIGKILL)


for step in range(1, steps + 1):
    print(f"ref {rank} {step} {train(reference, reference_optimizer, step)}", flush=True)
    if step <= start:
        continue
    print(f"loss {rank} {step} {train(ddp, optimizer, step)}", flush=True)
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    if acting and mode == "kill-in-save" and step == at:
        threading.Thread(target=kill_when_writing, args=(step,), daemon=True).start()
        state["ballast"] = torch.ones(64 << 20, dtype=torch.uint8)  # a save that takes a while
    ck.save(step, state)
    if acting and mode == "kill" and step == at:
        os.kill(os.getpid(), signal.SIGKILL)
print(f"done {rank}", flush=True)
